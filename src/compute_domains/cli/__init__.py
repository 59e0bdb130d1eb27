"""``cdctl``: the only package that parses flags and reads the environment."""
