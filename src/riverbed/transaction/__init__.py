"""The transaction coordinator as a sans-I/O core (KIP-98, KIP-360, KIP-664, KIP-890).

``records``: the ``__transaction_state`` formats, states and the id -> partition map.
"""
