"""cuca.providers"""
