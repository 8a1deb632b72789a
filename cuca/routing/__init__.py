"""Routing between clients and servers: ``FallbackClient`` (the next client when one
fails) and the pool behind ``CucaClient(base_url=[...])`` (one model on several servers).
Both wrap whole turns; neither reaches inside one."""
