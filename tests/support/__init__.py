"""Test infrastructure shared by test packages: throwaway PostgreSQL servers (``postgres``) and their fixtures."""
