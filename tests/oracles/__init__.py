"""Independent reference implementations (brute-force NumPy / plain Python) the tests compare against."""
