"""Domain-free building blocks shared by every component; imports nothing above it."""
