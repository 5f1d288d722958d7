"""The OpenAPI document made from the route declarations and the wire schemas, and its committed copy.
The browsable pages that show it are routes (app.api.routes.docs)."""
