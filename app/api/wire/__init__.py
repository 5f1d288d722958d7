"""What goes over the wire: request bodies and parameters in, resources, schemas and problem+json out.
The routes speak through these; the service never sees them."""
