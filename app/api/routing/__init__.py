"""How routes are declared (one RouteSpec each) and called (a request in, a finished response out).
The routes themselves are in app.api.routes."""
