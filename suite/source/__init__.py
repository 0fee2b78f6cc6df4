"""Where OpenZFS comes from: the git object cache (objects) and patch series (series).
"""
