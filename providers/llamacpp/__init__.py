"""llama.cpp's native ``/completion`` route.

Everything this wire knows, both directions."""
