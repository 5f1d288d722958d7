"""The write path: appends written and synced in shared rounds (by a sync process of its own), cut back when refused.
A change is acknowledged only once its round is durable."""
