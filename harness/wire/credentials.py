"""The key loopbench sends when the user gives none.

The reference server's: a real endpoint that refuses it needs the user's own key, and the
probe's hint (how to give one) is shown only when this one was sent.  Here, in the wire
layer, so that the CLI's common module reads it without importing the client.
"""

PLACEHOLDER_API_KEY = "sk-loopbench"
