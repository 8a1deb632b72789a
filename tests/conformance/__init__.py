"""One conformance suite that every provider adapter is run through."""
