"""What runs on a worker around the user's function: calls, tracebacks, memory limit."""
