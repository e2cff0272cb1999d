"""Files shipped inside the package: the example MCP client configuration
(`mcp_servers.json`: the knowledge base's `rag-mcp` over stdio)."""
