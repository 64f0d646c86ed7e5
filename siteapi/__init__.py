"""siteapi: the code behind the personal site's public, read-only JSON API."""
