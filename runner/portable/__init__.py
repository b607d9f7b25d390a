"""Results that travel: export bundles, reproduction on another host, the images they name."""
