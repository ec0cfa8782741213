"""Which processes exist and how they talk: the launcher's environment (launch), the
process group and its collectives (world), gradient sync of embedding rows (gradsync).
May import mixer.core. Layers: docs/architecture.md."""
