<!DOCTYPE html>
<html lang="{{lang}}" dir="{{dir}}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{title}} · {{site}}</title>
<meta name="description" content="{{description}}">
<link rel="icon" href="data:,">
% if canonical:
<link rel="canonical" href="{{canonical}}">
<meta property="og:type" content="{{og_type}}">
<meta property="og:site_name" content="{{site}}">
<meta property="og:title" content="{{title}}">
<meta property="og:description" content="{{description}}">
<meta property="og:url" content="{{canonical}}">
% if published:
<meta property="article:published_time" content="{{published}}">
% end
<script type="application/ld+json">{{!json_ld}}</script>
% end
% if markdown_path:
<link rel="alternate" type="text/markdown" href="{{markdown_path}}">
% end
<link rel="service-desc" type="application/openapi+json" href="/openapi.json">
<style>
  :root { color-scheme: light dark; --ink: #1d1d1f; --muted: #5f6368; --accent: #0b5cad; --bg: #fdfdfb; }
  @media (prefers-color-scheme: dark) { :root { --ink: #e8e6e3; --muted: #a0a4a8; --accent: #7ab7ff; --bg: #141414; } }
  body { margin: 0; background: var(--bg); color: var(--ink); font: 1.0625rem/1.6 system-ui, -apple-system, "Segoe UI", sans-serif; }
  .skip { position: absolute; left: -999px; } .skip:focus { left: 1rem; top: 1rem; background: var(--bg); padding: .5rem; }
  header, main, footer { max-width: 42rem; margin: 0 auto; padding: 1rem 1.25rem; }
  header nav { display: flex; flex-wrap: wrap; gap: .25rem 1rem; } a { color: var(--accent); }
  h1 { line-height: 1.2; } .lede { color: var(--muted); font-size: 1.125rem; }
  pre { white-space: pre-wrap; overflow-wrap: anywhere; padding: .75rem; background: rgba(127,127,127,.12); border-radius: 6px; }
  code { font-family: ui-monospace, "SFMono-Regular", Menlo, monospace; font-size: .92em; }
  table { border-collapse: collapse; } th, td { border: 1px solid rgba(127,127,127,.4); padding: .25rem .5rem; text-align: left; }
  footer { color: var(--muted); font-size: .9rem; }
</style>
</head>
<body>
<a class="skip" href="#content">Skip to content</a>
<header{{!chrome}}>
<nav aria-label="Site">
% for href, label in (("/", site), ("/writing", "Writing"), ("/photos", "Photos"), ("/garage", "Garage"), ("/developers", "API")):
<a href="{{href}}"{{!' aria-current="page"' if href == current else ''}}>{{label}}</a>
% end
</nav>
</header>
<main id="content">
<h1>{{title}}</h1>
<p class="lede">{{description}}</p>
% if published:
<p>Published <time datetime="{{published}}">{{published}}</time>.</p>
% end
{{!body}}
</main>
<footer{{!chrome}}>
<p>
% if markdown_path:
Also available as <a href="{{markdown_path}}">Markdown</a> ·
% end
<a href="/sitemap.xml">Sitemap</a> · <a href="/openapi.json">OpenAPI</a> · <a href="/data/">Data</a></p>
</footer>
<script>
// WebMCP: an agent working in this browser tab can search and ask the site through its read-only API.
if (navigator.modelContext && navigator.modelContext.provideContext) {
  const answer = async (url) => ({content: [{type: "text", text: await (await fetch(url)).text()}]});
  navigator.modelContext.provideContext({tools: [
    {name: "search_site", description: "Search this site's pages, writing and notes by keyword.",
     inputSchema: {type: "object", properties: {q: {type: "string"}}, required: ["q"]},
     execute: ({q}) => answer("/search.json?q=" + encodeURIComponent(q))},
    {name: "ask", description: "Ask this site a question in plain words; returns the pages that answer it.",
     inputSchema: {type: "object", properties: {query: {type: "string"}}, required: ["query"]},
     execute: ({query}) => answer("/ask?streaming=0&query=" + encodeURIComponent(query))}
  ]});
}
</script>
</body>
</html>
