"""Filled in below."""
