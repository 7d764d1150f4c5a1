print("stream-get stub")
