"""Tessera Pulumi program: read stack config -> validate -> one TesseraStack -> exports.

The work is in components/program.py so that tests can drive it under Pulumi mocks.
"""
from components.program import main

main()
