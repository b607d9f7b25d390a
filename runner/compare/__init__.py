"""The measure-judge-measure-more loop: a reference and one or more candidates measured
paired, judged by the gate, and measured more while the gate asks (docs/architecture.md
§4)."""
