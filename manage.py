#!/usr/bin/env python
"""Django's command-line utility. Embedded settings by default; hosted when DATABASE_URL is set."""
import os
import sys


def main() -> None:
    from covel.settings import default_settings_module

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", default_settings_module())
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
