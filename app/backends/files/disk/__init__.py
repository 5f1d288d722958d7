"""The data directory and the operating system: its layout and lock, the one door every file call goes through,
and how the system's errors become storage errors."""
