"""Schema fixtures of engram's SQLite database, one per engram version line, and a builder for them."""
