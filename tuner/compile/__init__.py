"""Compiling configs ahead: NVRTC with its cache and process pool, CUBIN and PTX readers, the compile target.
"""
