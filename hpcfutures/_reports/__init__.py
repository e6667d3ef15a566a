"""What the user is told about a run: the end-of-run summary and the dashboard line."""
