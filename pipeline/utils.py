"""Errors that a user caused and can fix: the CLI prints them as one line, the API as a 4xx."""


class UserError(Exception):
    """Bad input (a path, an argument, a file's contents) described in one short sentence."""
