"""What a request meets before its route: keys and tenants, the loopback and origin guards, rate limits.
Each answers a request itself when its check fails; none knows a route."""
