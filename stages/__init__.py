"""cuca.stages"""
