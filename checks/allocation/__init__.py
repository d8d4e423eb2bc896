"""Allocation ownership: allocation-owner and its cluster part."""
