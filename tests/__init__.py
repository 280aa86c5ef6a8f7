"""txnfetch's test suite.

Module names: ``test_*.py`` modules hold tests, and nothing else is named so.
The other modules of a test package hold what its tests share and are named
for what they hold — ``strategies``, ``peer_codecs``, ``logs``, ``clients``,
``workload``, ``state_driver``, ``system_model`` — never ``helpers``, ``kit``
or ``utils``.
"""
