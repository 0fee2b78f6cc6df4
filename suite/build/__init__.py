"""From a source tree to a verified build: kernel profiles (kernel), the cached debug
build (recipe), and user options to a build (pipeline).
"""
