"""Helpers that start and stop the real processes (weston, Xvfb) tests run against."""
