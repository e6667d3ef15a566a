"""What every layer uses: settings, the event-loop seam, logging, TLS credentials."""
