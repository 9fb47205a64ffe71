"""One partition's replica state (sans-I/O): ISR, high watermark, follower progress, fencing."""
