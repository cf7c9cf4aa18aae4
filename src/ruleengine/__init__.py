"""ruleengine — an asyncio-native automation engine for Meta advertising rules."""

__version__ = "0.1.0"
