"""What a user installs: the build's progress on the terminal, the wheel's name, contents and tag."""
