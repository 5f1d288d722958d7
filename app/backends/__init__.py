"""Where sessions live: the storage seam (:mod:`app.backends.base`) and its implementations."""
