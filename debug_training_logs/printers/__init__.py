"""Printers: ways of showing a result to a person (the HTML report); they compute nothing about the job."""
