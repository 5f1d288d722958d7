"""The operator's commands' work (spec 10): import a DSH log, export a session, copy every session between stores,
verify a data directory. The command line only parses its flags, calls these and prints what they answer.
"""
