"""What a campaign shows people: markdown logs and summaries, the HTML report, plots, status."""
