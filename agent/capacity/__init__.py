"""Decide what to lend: the node's lendable capacity by each publishing model (`lendable`), batch capacity
against what batch pods hold (`batch_floor`), when a published number changes (`publish_rules`), and the
owner of what the node should carry (`owner`)."""
