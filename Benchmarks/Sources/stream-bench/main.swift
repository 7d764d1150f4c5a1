print("stream-bench stub")
