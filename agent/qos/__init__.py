"""What Colo does for online pods themselves: CFS burst, dynamic quota burst and memory QoS.

Each module is a pure decision over explicit inputs (no I/O): the agent's pass builds the inputs from its
node state record and hands the decisions to the one executor that writes cgroups through the ledger.
"""
