"""The floor below both servers: what the proxy and the trainer share and no client needs.

The chat request model and its checks (`chat_request`), images in a request (`images`), an engine's answer
(`engine_answer`), a call's prompt label (`labels`), the server commands' flags and typed options (`flags`,
`options`), and a server process's start-up (`runtime`). Beside it on this floor: the store (`ajet_store`) and the
token history's rules (`ajet_token_history`). It imports the SDK's wire types and nothing of the servers.
"""
