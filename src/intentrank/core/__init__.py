"""The stage protocol, its algebra, parameters, the stage registry and the config grammar."""
