"""The API's routers, one thin module per concern."""
