"""How every refusal and result is answered: one table for pages, the admin and commands.

``table`` holds the answer kinds and their channels (HTTP status, admin message level, exit
code), the three edges that speak them, and the 303, 409 and error pages.
"""
