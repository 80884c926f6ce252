"""Traffic-light states: the light head's class order (``lights.logits``) and the evaluation's."""

# "off" also covers lights whose state is not visible (BDD100K "none" / "NA").
LIGHT_STATES = ("red", "yellow", "green", "off")
