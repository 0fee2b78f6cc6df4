pytest_plugins = ["suite.plugin"]
