"""What every request leaves for operators (spec 13): its id, its access-log line, its metrics, its span.
Nothing here changes an answer."""
