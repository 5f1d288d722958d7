"""The search engine seam (spec 12) and its SQLite FTS5 engine beside the files (PostgreSQL's is in
app.backends.postgres.search)."""
