"""Presentation: live progress on the console, JSON and Markdown reports."""
