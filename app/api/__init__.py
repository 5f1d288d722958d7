"""The HTTP layer: routes, wire models, problem+json errors, settings and the app factory. Thin by design."""
