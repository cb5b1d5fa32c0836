"""Scrape-time collectors: GPU (NVML) and host/process (psutil) readings."""
