"""The lens: fetch a public URL someone else chose and report how a machine sees it.

fetch.py is the only way the product fetches such a URL (address policy, deadline, caps);
page.py is the page pass; cost.py prices it in tokens; observe.py assembles the
LensObservation of `/lens/fetch`; vault.py stores representation snapshots.
"""
