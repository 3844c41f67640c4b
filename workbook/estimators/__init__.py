"""Gradients through discrete choices, measured against the exact gradient (06)."""
