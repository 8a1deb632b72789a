"""cuca.engine"""
